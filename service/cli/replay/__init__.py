"""`fairway bench replay TRACE`: a public trace replayed against the real stack as many tenants
at once (realtime streams with service tiers, batch files through the Batch API), and the same
requests against a bare vLLM OpenAI server (FCFS or priority) side by side.

plan.py maps the trace to requests (pure), load.py sends them, vllm_baseline.py starts a bare
vLLM server, report.py turns the outcomes into the tables, cli.py is the command."""
