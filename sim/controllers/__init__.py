"""The controllers the simulator runs on a pool: ours (gpuloan.py, the Lambda's own tick over the in-memory
ports of ports.py), Karpenter (karpenter.py) and the baselines (baselines.py), on one interface (base.py);
lineup.py names the rows a comparison runs."""
