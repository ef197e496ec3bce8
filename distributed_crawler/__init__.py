"""distributed_crawler: many Scrapy nodes, one Redis, one crawl."""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    """`distributed_crawler.Addon`, imported on first use (the package import stays light)."""
    if name == "Addon":
        from distributed_crawler.addon import Addon

        return Addon
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Addon", "__version__"]
