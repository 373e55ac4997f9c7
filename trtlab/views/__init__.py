"""What people look at: figures, reports, dashboards, widget panels."""
