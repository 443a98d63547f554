"""pyllm-server: llama-server's HTTP API on top of pyllm.engine."""
