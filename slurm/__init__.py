"""Launch replications on SLURM through submitit; cluster profiles; a single-node dev cluster.

See slurm/README.md. Entry points: `slurm.launch.launch` (called by
`python -m experiments.replicate --cluster slurm`, which hands it what to run) and
`python -m slurm status|collect`. Nothing here imports `replications/`.
"""
