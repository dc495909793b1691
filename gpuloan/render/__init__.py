"""What the commands print: the one table style, the JSON conventions, the PR comment."""
