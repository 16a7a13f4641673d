"""Publishing what the radar found: rows for scripts and people (jobs.publish.output)."""
