"""From a model to kernels: a model step's regions, their costs (hotspots), one region as a reference
(extract), and the model with kernels in place of regions (compose)."""
