"""GitOps: the GitHub OIDC roles, their IAM permissions, CI's cluster RBAC, the role guard."""
