"""The policy function's adapters: every call to AWS (boto3 clients) and to the cluster's Kubernetes API.

Each module implements ports the tick drives (policy/ports.py and the modules that declare them) over injected
clients (STYLE.md 2 and 3): the handler (policy/handler.py) builds the clients once and passes them in. Nothing
here decides; nothing in policy/decide/, policy/model.py or policy/terms.py imports this package (an
import-linter contract, pyproject.toml), so the decision core is tested without AWS, a cluster or moto.
"""
