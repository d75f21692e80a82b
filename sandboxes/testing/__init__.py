"""Test and benchmark helpers. Nothing here is used by the service itself.

`sandboxes.testing.kube_emulator`: an EMULATED Kubernetes API server (PyPI `kmock`) and a fake
kubelet that runs real agents on this machine - for tests and benchmarks of the kubernetes backend
where no real cluster exists. It needs the `testing` extra (`pip install 'sandboxes[testing]'`).
"""
