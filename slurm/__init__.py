"""Launch replications on SLURM through submitit; cluster profiles; a single-node dev cluster.

See slurm/README.md. Entry points: `slurm.launch.launch_slurm` (called by
`python -m replications.replicate --cluster slurm`) and `python -m slurm status|collect`.
"""
