"""The real Pulumi program run in-process under mocks (runner), which node groups a change between two runs replaces or
rolls (rollout), and the limits on a config document before anything expands it (document_limits)."""
