"""The gpuloan policy function: a pure decision core (decide/) with thin AWS/Kubernetes adapters.

Packaged as the Lambda zip: standard library + boto3 (in the Lambda runtime) only.
"""
