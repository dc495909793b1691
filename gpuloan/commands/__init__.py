"""One module per `gpuloan` command: each exposes `register(subparsers)` (gpuloan/cli.py lists them)."""
