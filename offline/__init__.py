"""The real Pulumi program run in-process under mocks (runner), and which node groups a change between two runs replaces or rolls (rollout)."""
