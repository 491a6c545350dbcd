#!/usr/bin/env bash
# The device checks of the array-API kernel, in one run on a machine with a CUDA GPU:
#   1. the CUDA tests (values, gradients and trainers on CUDA tensors, `-m gpu`);
#   2. benchmarks/gpu_trainers.py: every trainer on CPU and CUDA, distances and ms/step;
#   3. benchmarks/torch_bench.py: the kernel against torch.softmax on CPU and on CUDA at
#      (4096, 131072) float32 and bfloat16, with peak extra memory, and trainer speeds.
# Run from the repository root: `bash benchmarks/gpu_check.sh [OUTDIR]`; the outputs go
# to OUTDIR (default: gpu_check_out/) to be copied into docs/performance.md.
set -u
out="${1:-gpu_check_out}"
mkdir -p "$out"
python -c "import torch; assert torch.cuda.is_available(), 'no CUDA device'; \
print(torch.__version__, torch.cuda.get_device_name(0))" | tee "$out/device.txt" || exit 1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python -m pytest -q -p no:cacheprovider -m gpu -rs tests 2>&1 | tee "$out/gpu_tests.txt"
python benchmarks/torch_bench.py 2>&1 | tee "$out/torch_bench.txt"
python benchmarks/gpu_trainers.py 2>&1 | tee "$out/gpu_trainers.txt"
