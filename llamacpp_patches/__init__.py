"""llama.cpp latency tools: the `llama-osd-stream` example, its driver and the latency report."""
