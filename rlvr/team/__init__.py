"""From a folder to a team: the shared DVC remote, the model registry (GTO) with champion against
challenger, and the nightly that runs the branch from git."""
