"""The cost model: monthly cost of a config's pools, platform rows, spot spread (reads the config models and the price sources)."""
