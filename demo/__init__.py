"""The demo `news` project (scrapy.cfg at the repo root points here)."""
