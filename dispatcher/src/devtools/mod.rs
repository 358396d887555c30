//! Developer tools: the quickstart and its throwaway PostgreSQL. The tests' harness built on it
//! (a shared cluster, replicas, PgBouncer, transaction-id boundaries) is `highwater-testkit`.
pub mod embedded;
pub mod quickstart;
