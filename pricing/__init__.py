"""Prices and costs: plain data in (instance types, counts, rates, the config models), never Pulumi."""
