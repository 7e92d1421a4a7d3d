"""The test settings with the project's own mailer (``OVERSIGHT_EMAIL_*``: an SMTP server
when ``OVERSIGHT_EMAIL_BACKEND`` names one) where tests.settings keeps mail in memory: for
a child process that must talk to a real mail server, started with
``DJANGO_SETTINGS_MODULE=tests.smtp_settings``."""

import oversight.settings
from tests.settings import *  # noqa: F403

MAILERS = oversight.settings.MAILERS
