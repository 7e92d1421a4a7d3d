from runs.models.admin_checkpoints import AdminCheckpoint
from runs.models.alerts import Alert, AlertDelivery
from runs.models.archives import HistoryArchive
from runs.models.artifacts import Artifact
from runs.models.checkpoints import Checkpoint, CheckpointArtifact
from runs.models.feed import FeedEvent
from runs.models.identities import ProviderIdentity
from runs.models.ledger import Account, LedgerEntry
from runs.models.operations import Decision, Operation
from runs.models.outbox import SentEmail
from runs.models.preferences import Preferences
from runs.models.projects import ApprovalPolicy, Membership, Project, Role
from runs.models.replays import ApiReplay
from runs.models.requests import HumanRequest
from runs.models.runs import Message, Run, Session
from runs.models.slack import SlackChannel, SlackIdentity, SlackLinkCode, SlackMessage
from runs.models.tokens import AgentToken
from runs.models.webhooks import WebhookDelivery, WebhookEndpoint, WebhookEvent
from runs.models.workers import SharedWorkspace, WorkerHeartbeat, WorkerPause

__all__ = [
    "Account",
    "AdminCheckpoint",
    "AgentToken",
    "Alert",
    "AlertDelivery",
    "ApiReplay",
    "ApprovalPolicy",
    "Artifact",
    "Checkpoint",
    "CheckpointArtifact",
    "Decision",
    "FeedEvent",
    "HistoryArchive",
    "HumanRequest",
    "LedgerEntry",
    "Membership",
    "Message",
    "Operation",
    "Preferences",
    "Project",
    "ProviderIdentity",
    "Role",
    "Run",
    "SentEmail",
    "Session",
    "SharedWorkspace",
    "SlackChannel",
    "SlackIdentity",
    "SlackLinkCode",
    "SlackMessage",
    "WebhookDelivery",
    "WebhookEndpoint",
    "WebhookEvent",
    "WorkerHeartbeat",
    "WorkerPause",
]
