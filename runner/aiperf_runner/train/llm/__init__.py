"""AIPerf-LLM's training side: the decoder-only transformer (`model`) and its function-preserving growth
(`morph`). Needs torch; the architecture and its FLOPs are torch-free, in `spec/llmflops.py`."""
