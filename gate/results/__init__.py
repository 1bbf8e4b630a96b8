"""Result records, findings grouped per site, the baseline, causes and hints."""
