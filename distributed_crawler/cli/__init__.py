"""`dcrawl`: operate the cluster from a shell."""
