//! `gristmill-etl`: ETL specs and runtimes. Nothing is implemented yet; see `README.md`.
