"""Spend controls: AWS Budgets, CloudWatch alarms and dashboard, the alert topic."""
