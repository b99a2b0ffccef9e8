"""Architecture search (network morphism + Bayesian optimisation) and hyper-parameter search (TPE)."""
