"""The typed config and its vocabulary: the pydantic models and their rules, the CUDA compatibility tables, the Kueue
plan, names, node sizes, pinned versions, tag keys and secret placeholders. No Pulumi (docs/architecture.md)."""
