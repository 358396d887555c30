//! Developer tools: a throwaway PostgreSQL (the quickstart's and the tests') and the quickstart.
pub mod embedded;
pub mod pgbouncer;
pub mod quickstart;
