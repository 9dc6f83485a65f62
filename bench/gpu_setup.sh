#!/usr/bin/env bash
# Prepare a bare GPU machine for the benchmarks: install the wheels carried in .whl/ and KernelZero itself.
# Usage (from the repository root): source bench/gpu_setup.sh
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-packages .whl/*.whl || return 1
export PYTHONPATH=/tmp/site-packages:$PWD${PYTHONPATH:+:$PYTHONPATH}
python3 -m pip install -q --no-deps --no-build-isolation --no-cache-dir -e . || return 1
export TORCH_CUDA_ARCH_LIST=9.0 PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, torch.cuda.get_device_name())"
