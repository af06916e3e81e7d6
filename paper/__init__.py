"""Tables, figures and REPORT.md built from the run directories under results/ alone.

`python -m paper.build` (or `make paper`); see paper/README.md for the CARD.md claim schema.
"""
