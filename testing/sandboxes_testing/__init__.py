"""Test and benchmark helpers of `sandboxes` (distribution `sandboxes-testing`, never shipped with
the service).

`sandboxes_testing.kube_emulator`: an EMULATED Kubernetes API server (PyPI `kmock`) and a fake
kubelet that runs real agents on this machine - for tests and benchmarks of the kubernetes backend
where no real cluster exists. `sandboxes_testing.userns_pod`: a user-namespaced pod's container.
"""
