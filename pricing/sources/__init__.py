"""Price sources: instance facts, AWS price readers, the offline price file and cache, commitment rates (the bottom layer: imports nothing from gpuloan's other packages)."""
