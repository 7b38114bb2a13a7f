"""The runtime database and its stores as a backend offers them (`ports.StorageBackend`),
the same on both backends: each backend builds them and hands them over here."""

from __future__ import annotations

from alarmtop.core.ports import AlarmRows, AuditRows, ExecutionLog, OperatorRows, RuntimeDatabase


class BackendStores:
    """The parts every backend has, by their port names."""

    def __init__(self, database: RuntimeDatabase, alarm_rows: AlarmRows,
                 execution_log: ExecutionLog, audit_rows: AuditRows,
                 operator_rows: OperatorRows) -> None:
        self._stores = (database, alarm_rows, execution_log, audit_rows, operator_rows)

    @property
    def database(self) -> RuntimeDatabase:
        return self._stores[0]

    @property
    def alarm_rows(self) -> AlarmRows:
        return self._stores[1]

    @property
    def execution_log(self) -> ExecutionLog:
        return self._stores[2]

    @property
    def audit_rows(self) -> AuditRows:
        return self._stores[3]

    @property
    def operator_rows(self) -> OperatorRows:
        return self._stores[4]
