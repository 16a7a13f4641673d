-- Gate scenarios: the memory reading's transaction (its cursor lives until the rollback).
BEGIN /* pg-regression-radar */
