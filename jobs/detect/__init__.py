"""Detection: samples from snapshots, change points, the statistical steps (segments, Welch), deploy
analysis and attribution, unannounced analysis, work and contention evidence, findings, the scope of a
run, the fleet-wide FDR step, and the verdict names every step shares (``verdicts``).
"""
