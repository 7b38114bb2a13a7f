"""alarmtop's storage on PostgreSQL (asyncpg): the fleet backend."""
