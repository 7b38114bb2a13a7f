"""Bulk actions: one operator decision applied to many alarms or executions, durably.

`selection` and `actions` (pure) say what a batch is; `progress` (pure) counts it;
`service.BulkService` (`rt.bulk`) starts, runs, resumes and cancels batches.
"""
