# Sourced by scripts/deps.sh. The policy tests load the real ONNX Runtime; when it is not
# cached yet they download the pinned onnxruntime wheel from PyPI with `python3 -m pip
# download` and unpack libonnxruntime.so with Python's zipfile (policy/src/provision.rs),
# into ~/.cache/smartmig/onnxruntime/<version>/. That needs Python and pip.
need+=(python3 python3-pip)
