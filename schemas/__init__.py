"""Settings, record and control-message models, and Spark schemas."""
