//! `kubebyon org`: the organisations one belongs to, the one commands act
//! in (the context's), and an organisation's members, invitations and roles
//! (docs/organizations.md).

use clap::Subcommand;
use reqwest::Method;
use serde_json::json;

use crate::{
    Session,
    client::{self, Client, segment},
    error::{CliError, Exit},
    model::{Invitation, InvitationMade, Member, Membership},
    output::{self, Format},
};

#[derive(Debug, Subcommand)]
pub enum OrgCommand {
    /// The organisations one belongs to, with one's role; the one in use marked.
    #[command(visible_alias = "ls")]
    List,
    /// Act in an organisation (its name or id) from now on, in this context.
    Switch { organization: String },
    /// Make a shared organisation (one becomes its owner).
    Create { name: String },
    /// The members of the organisation in use.
    Members,
    /// Invite someone by email, with a role (owner, admin, member, viewer).
    Invite {
        email: String,
        #[arg(long, default_value = "member")]
        role: String,
    },
    /// The invitations of the organisation in use.
    Invitations,
    /// Change a member's role.
    Role { email: String, role: String },
    /// Take a member out of the organisation.
    Remove { email: String },
}

/// The organisation in use: the context's, else one's personal one.
async fn current(client: &Client, session: &Session) -> Result<Membership, CliError> {
    let memberships: Vec<Membership> =
        client::read(&client.get("/api/console/organizations").await?)?;
    match &session.context.organization {
        Some(id) => memberships
            .into_iter()
            .find(|m| &m.id == id)
            .ok_or_else(|| {
                CliError::new(
                    Exit::NotFound,
                    format!("not a member of the organisation {id} (`kubebyon org list`)"),
                )
            }),
        None => memberships
            .into_iter()
            .find(|m| m.personal)
            .ok_or_else(|| CliError::new(Exit::NotFound, "no personal organisation")),
    }
}

async fn member_of(client: &Client, organization: &str, email: &str) -> Result<Member, CliError> {
    let members: Vec<Member> = client::read(
        &client
            .get(&format!(
                "/api/console/organizations/{}/members",
                segment(organization)
            ))
            .await?,
    )?;
    members
        .into_iter()
        .find(|m| m.email.eq_ignore_ascii_case(email))
        .ok_or_else(|| {
            CliError::new(
                Exit::NotFound,
                format!("{} is not a member", crate::error::one_line(email)),
            )
        })
}

pub async fn run(mut session: Session, command: OrgCommand) -> Result<(), CliError> {
    let client = session.signed_in()?;
    match command {
        OrgCommand::List => {
            let raw = client.get("/api/console/organizations").await?;
            let memberships: Vec<Membership> = client::read(&raw)?;
            let in_use = current(&client, &session).await.ok().map(|m| m.id);
            output::print(
                session.output,
                &raw,
                &["IN USE", "NAME", "ROLE", "PERSONAL", "ID"],
                memberships
                    .iter()
                    .map(|m| {
                        vec![
                            if in_use.as_deref() == Some(&m.id) {
                                "*"
                            } else {
                                ""
                            }
                            .into(),
                            m.name.clone(),
                            m.role.clone(),
                            if m.personal { "yes" } else { "no" }.into(),
                            m.id.clone(),
                        ]
                    })
                    .collect(),
            )
        }
        OrgCommand::Switch { organization } => {
            let memberships: Vec<Membership> =
                client::read(&client.get("/api/console/organizations").await?)?;
            let chosen = memberships
                .into_iter()
                .find(|m| m.id == organization || m.name == organization)
                .ok_or_else(|| {
                    CliError::new(
                        Exit::NotFound,
                        format!("not a member of {}", crate::error::one_line(&organization)),
                    )
                })?;
            let Some(name) = session.context_name.clone() else {
                return Err(CliError::new(
                    Exit::Usage,
                    "no context to remember it in: sign in with `kubebyon login`, or give --org",
                ));
            };
            let context = session.config.contexts.entry(name.clone()).or_default();
            context.organization = (!chosen.personal).then(|| chosen.id.clone());
            session.config.save()?;
            note!("{name} now acts in {} (as {}).", chosen.name, chosen.role);
            Ok(())
        }
        OrgCommand::Create { name } => {
            let answer = client
                .call(
                    Method::POST,
                    "/api/console/organizations",
                    Some(&json!({ "name": name })),
                )
                .await?;
            let made: Membership = answer.read()?;
            note!(
                "Made {} ({}); `kubebyon org switch {}` acts in it.",
                made.name,
                made.id,
                made.id
            );
            if session.output != Format::Table {
                output::print(session.output, &answer.body, &[], vec![])?;
            }
            Ok(())
        }
        OrgCommand::Members => {
            let organization = current(&client, &session).await?;
            let raw = client
                .get(&format!(
                    "/api/console/organizations/{}/members",
                    segment(&organization.id)
                ))
                .await?;
            let members: Vec<Member> = client::read(&raw)?;
            output::print(
                session.output,
                &raw,
                &["EMAIL", "NAME", "ROLE", "SINCE"],
                members
                    .iter()
                    .map(|m| {
                        vec![
                            m.email.clone(),
                            m.display_name.clone(),
                            m.role.clone(),
                            output::age(&m.created_at),
                        ]
                    })
                    .collect(),
            )
        }
        OrgCommand::Invite { email, role } => {
            let organization = current(&client, &session).await?;
            let answer = client
                .call(
                    Method::POST,
                    &format!(
                        "/api/console/organizations/{}/invitations",
                        segment(&organization.id)
                    ),
                    Some(&json!({ "email": email, "role": role })),
                )
                .await?;
            let made: InvitationMade = answer.read()?;
            note!(
                "Invited {} to {} as {}; the link was emailed and is valid until {}.",
                made.invitation.email,
                organization.name,
                made.invitation.role,
                made.invitation.expires_at
            );
            if session.output != Format::Table {
                output::print(session.output, &answer.body, &[], vec![])?;
            }
            Ok(())
        }
        OrgCommand::Invitations => {
            let organization = current(&client, &session).await?;
            let raw = client
                .get(&format!(
                    "/api/console/organizations/{}/invitations",
                    segment(&organization.id)
                ))
                .await?;
            let invitations: Vec<Invitation> = client::read(&raw)?;
            output::print(
                session.output,
                &raw,
                &["EMAIL", "ROLE", "STATUS", "EXPIRES"],
                invitations
                    .iter()
                    .map(|i| {
                        vec![
                            i.email.clone(),
                            i.role.clone(),
                            i.status.clone(),
                            i.expires_at.clone(),
                        ]
                    })
                    .collect(),
            )
        }
        OrgCommand::Role { email, role } => {
            let organization = current(&client, &session).await?;
            let member = member_of(&client, &organization.id, &email).await?;
            client
                .call(
                    Method::PATCH,
                    &format!(
                        "/api/console/organizations/{}/members/{}",
                        segment(&organization.id),
                        segment(&member.user_id)
                    ),
                    Some(&json!({ "role": role })),
                )
                .await?;
            note!("{} is now {} in {}.", member.email, role, organization.name);
            Ok(())
        }
        OrgCommand::Remove { email } => {
            let organization = current(&client, &session).await?;
            let member = member_of(&client, &organization.id, &email).await?;
            client
                .call(
                    Method::DELETE,
                    &format!(
                        "/api/console/organizations/{}/members/{}",
                        segment(&organization.id),
                        segment(&member.user_id)
                    ),
                    None,
                )
                .await?;
            note!("{} is out of {}.", member.email, organization.name);
            Ok(())
        }
    }
}
