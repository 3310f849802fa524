# Sourced by the device scripts that run on several GPUs: NCCL for cudarc, NVLink multicast off
# (the device tool's KINDS.md), and N = the number of GPUs.
export NCCL_NVLS_ENABLE=0
# The nvidia-nccl-cu13 wheel ships libnccl.so.2; cudarc looks for libnccl.so.
NCCL_DIR=$(python3 -c "import nvidia.nccl as n; import os; print(os.path.join(list(n.__path__)[0], 'lib'))")
mkdir -p /tmp/nccl-lib && ln -sf "$NCCL_DIR/libnccl.so.2" /tmp/nccl-lib/libnccl.so
export LD_LIBRARY_PATH=/tmp/nccl-lib:$NCCL_DIR:${LD_LIBRARY_PATH:-}
N=$(nvidia-smi -L | wc -l)
