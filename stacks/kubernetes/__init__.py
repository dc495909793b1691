"""Kubernetes: what gpuloan installs in the cluster (layer.py wires it)."""
