"""The official Mu-SHROOM metrics, reproduced exactly, plus confidence intervals."""
