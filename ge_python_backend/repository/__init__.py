"""Model repositories: config.pbtxt built from an .om, scaffolding, validation."""
