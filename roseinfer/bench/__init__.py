"""Benchmark helpers: what `python -m roseinfer.benchmark_scheduler` and `benchmark_streaming` share (`common`),
the HBM-bandwidth floor of a decode run (`roofline`), Hugging Face `generate` on our weights (`hf_reference`) and
GPU timing for the kernel benchmarks in scripts/ (`timing`)."""
