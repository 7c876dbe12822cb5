from scratchpipe_sim.cli import console

console()
