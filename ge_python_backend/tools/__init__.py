"""Operator tools: doctor, Kubernetes manifests, compare, the load generator."""
