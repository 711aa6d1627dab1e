"""What the chips are and how a target is served: chip specs, targets, megacore, meshes, host environment."""
