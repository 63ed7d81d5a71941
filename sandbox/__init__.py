"""A local Kubernetes sandbox (etcd, control plane, kwok) built from Go modules, for tests and the demo."""
