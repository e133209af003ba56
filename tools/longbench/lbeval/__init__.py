"""LongBench v1 evaluation of slake's KV-cache policies (tools/longbench)."""
