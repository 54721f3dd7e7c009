"""What a run produces and how it is read: the per-request table (recorder), every metric formula (metrics),
latency histograms, optional observers (timeline, Chrome trace), the per-token log and progress reporting."""
