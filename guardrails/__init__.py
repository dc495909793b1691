"""The gpuloan guardrails policy pack (CrossGuard). The rules live in guardrails/policies.py."""
