"""The policy function's deployment side: the Lambda and its schedule (function), the zip of policy/ (package);
its settings from the config are pricing/policy_settings.py (no Pulumi)."""
