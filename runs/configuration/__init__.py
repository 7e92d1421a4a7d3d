"""Configuration as code: projects, members and roles, approval policies, alert and
notification channels kept in a YAML file under version control (``apply_config``,
``export_config``; docs/operating/configuration.md). ``document`` reads the file with
its lines, ``schema`` checks it, ``plan`` compares it with the database, ``files``
loads, applies and exports."""
