//! Hierarchical weights: a device split between teams first, then within
//! each team between its active members.
//!
//! [`sched::targets`](super::sched::targets) splits a device between
//! claimants by share, limit and priority. With teams it runs twice:
//! 1. Between groups: each team with an active member is one claimant with
//!    the team's settings; each active tenant in no team is one with its
//!    own. So the time a whole team leaves idle goes to the other groups.
//! 2. Within each team: the team's part is divided among its active members
//!    by their own shares (equally where none, spare by their own
//!    priorities), and no member above its own limit: what a member's limit
//!    stops goes to its team-mates. Time a member leaves idle stays in its
//!    team, since only active members are split.
//!
//! What the scheduler then holds each member to ([`Split::claims`]): its
//! team's priority (turns are ended and taken by it, so a team's priority
//! ranks all its members), and, where the team has a limit, the part of
//! the team's limit in proportion to the member's target (the members'
//! limits then add up to the team's, so the budgets that enforce limits
//! enforce the team's too, however few members are busy).
//!
//! Members' processes never reach this: who is in which team, and the
//! teams' settings, come from the configuration alone (and, for a team's
//! `accounts`, the monitor's own admission records).

use super::sched::{effective_claims, targets, Declared};
use crate::compute::Claim;

const WHOLE_E4: u64 = ledger::compute::WHOLE_DEVICE_RATIO_E4 as u64;

/// A member's team on one device: which team, and its settings there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TeamClaim {
    /// The team's number, stable across members of one configuration.
    pub id: u32,
    /// The team's share, limit and priority on this device.
    pub claim: Claim,
}

/// What [`split`] decides for each active member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Split {
    /// Target fractions of the device, ratio × 10 000.
    pub targets: Vec<u32>,
    /// The settings the scheduler holds each member to: its own, with its
    /// team's priority and its part of the team's limit for a member of a
    /// team.
    pub claims: Vec<Claim>,
}

/// A claimant between teams: a team (its number) or a member in none, its
/// settings and who declared them, and the indices of its members.
type Group = (Option<u32>, (Claim, Option<Declared>), Vec<usize>);

/// Splits a device between `members` (each active member's own settings,
/// and who declared them when the configuration does not name it),
/// `teams[i]` being member `i`'s team; without teams it is
/// [`targets`] of [`effective_claims`]. A team's share counts as a
/// configured one: self-declared shares divide only what configured and
/// team shares leave.
pub fn split(members: &[(Claim, Option<Declared>)], teams: &[Option<TeamClaim>]) -> Split {
    let claims: Vec<Claim> = members.iter().map(|(claim, _)| *claim).collect();
    let claims = &claims[..];
    // Groups: one per team present, one per member in no team.
    let mut groups: Vec<Group> = Vec::new();
    for (i, member) in members.iter().enumerate() {
        match teams.get(i).copied().flatten() {
            Some(team) => match groups.iter_mut().find(|(id, _, _)| *id == Some(team.id)) {
                Some((_, _, members)) => members.push(i),
                None => groups.push((Some(team.id), (team.claim, None), vec![i])),
            },
            None => groups.push((None, *member, vec![i])),
        }
    }
    let group_members: Vec<(Claim, Option<Declared>)> = groups.iter().map(|(_, member, _)| *member).collect();
    let group_claims = effective_claims(&group_members);
    let group_targets = targets(&group_claims);
    let mut out = vec![0u64; claims.len()];
    let mut held: Vec<Claim> = claims.to_vec();
    for ((team, (team_claim, _), members), group_target) in groups.iter().zip(group_targets) {
        if team.is_none() {
            for &i in members {
                out[i] = u64::from(group_target);
            }
            continue;
        }
        let parts = within_team(claims, members, u64::from(group_target));
        let team_target: u64 = parts.iter().sum::<u64>().max(1);
        for (&i, part) in members.iter().zip(&parts) {
            out[i] = *part;
            held[i].priority = team_claim.priority;
            if team_claim.limited() {
                // The member's part of the team's limit: in proportion to
                // its target, at least enough to be granted at all.
                let of_limit = (u64::from(team_claim.limit_e4) * part / team_target).max(1) as u32;
                held[i].limit_e4 = if claims[i].limited() { claims[i].limit_e4.min(of_limit) } else { of_limit };
            }
        }
    }
    Split { targets: out.into_iter().map(|t| t.min(WHOLE_E4) as u32).collect(), claims: held }
}

/// Divides `team_target` between `members` of `claims` by their own
/// shares (equally where none), none past its own limit: what a limit
/// stops goes to the others.
fn within_team(claims: &[Claim], members: &[usize], team_target: u64) -> Vec<u64> {
    // Relative parts: the members' own settings without their limits, as
    // if the team were the whole device.
    let relative = targets(&members.iter().map(|&i| Claim { limit_e4: 0, ..claims[i] }).collect::<Vec<_>>());
    let limit = |i: usize| if claims[i].limited() { u64::from(claims[i].limit_e4) } else { WHOLE_E4 };
    let mut part = vec![0u64; members.len()];
    let mut left = team_target;
    // Water-fill: each round gives what is left by the relative parts of
    // the members below their limits; at most one round per member.
    for _ in 0..=members.len() {
        let open: Vec<usize> = (0..members.len()).filter(|&k| part[k] < limit(members[k])).collect();
        let weight: u64 = open.iter().map(|&k| u64::from(relative[k]).max(1)).sum();
        if open.is_empty() || left == 0 || weight == 0 {
            break;
        }
        let mut given = 0;
        for &k in &open {
            let portion = left * u64::from(relative[k]).max(1) / weight;
            let add = portion.min(limit(members[k]) - part[k]);
            part[k] += add;
            given += add;
        }
        left -= given;
        if given == 0 {
            break;
        }
    }
    part
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(share: u32, limit: u32, priority: i32) -> Claim {
        Claim { share_e4: share * 100, limit_e4: limit * 100, priority }
    }

    fn team(id: u32, share: u32, limit: u32, priority: i32) -> Option<TeamClaim> {
        Some(TeamClaim { id, claim: claim(share, limit, priority) })
    }

    fn split(claims: &[Claim], teams: &[Option<TeamClaim>]) -> Split {
        super::split(&claims.iter().map(|c| (*c, None)).collect::<Vec<_>>(), teams)
    }

    fn percents(split: &Split) -> Vec<f64> {
        split.targets.iter().map(|t| f64::from(*t) / 100.0).collect()
    }

    #[test]
    fn one_busy_tenant_against_four_gets_the_team_split_not_the_tenant_split() {
        let members = vec![claim(0, 0, 0); 5];
        let teams = [team(1, 50, 0, 0), team(2, 50, 0, 0), team(2, 50, 0, 0), team(2, 50, 0, 0), team(2, 50, 0, 0)];
        assert_eq!(percents(&split(&members, &teams)), vec![50.0, 12.5, 12.5, 12.5, 12.5]);
        // Without teams, the tenant split.
        assert_eq!(percents(&split(&members, &[None; 5])), vec![20.0; 5]);
    }

    #[test]
    fn more_tenants_gain_a_team_nothing() {
        for n in 1..=8usize {
            let mut members = vec![claim(0, 0, 0)];
            let mut teams = vec![team(1, 30, 0, 0)];
            members.extend(vec![claim(0, 0, 0); n]);
            teams.extend(vec![team(2, 70, 0, 0); n]);
            let got = split(&members, &teams);
            assert_eq!(got.targets[0], 3000, "{n} members of B");
            assert!((7000 - got.targets[1..].iter().sum::<u32>()) < n as u32, "{n}: {:?}", got.targets);
        }
    }

    #[test]
    fn a_team_divides_its_part_by_its_members_shares_and_keeps_what_one_leaves() {
        // Members' shares 10 and 30 split the team's 60 as 1 : 3.
        let got = split(&[claim(10, 0, 0), claim(30, 0, 0), claim(40, 0, 0)], &[team(1, 60, 0, 0), team(1, 60, 0, 0), None]);
        assert_eq!(percents(&got), vec![15.0, 45.0, 40.0]);
        // Alone in its team, a member has the team's whole part, not its own share.
        let got = split(&[claim(10, 0, 0), claim(40, 0, 0)], &[team(1, 60, 0, 0), None]);
        assert_eq!(percents(&got), vec![60.0, 40.0]);
        // A member's own limit stops it; its team-mate gets the rest.
        let got = split(&[claim(0, 10, 0), claim(0, 0, 0), claim(0, 0, 0)], &[team(1, 50, 0, 0), team(1, 50, 0, 0), None]);
        assert_eq!(percents(&got), vec![10.0, 40.0, 50.0]);
    }

    #[test]
    fn a_teams_limit_caps_its_members_together_and_its_priority_ranks_them() {
        // Alone on the device, a team limited to 70 gets 70 in all, whatever
        // the number of its members, and the scheduler holds each to its part.
        for n in 1..=4usize {
            let got = split(&vec![claim(0, 0, 0); n], &vec![team(1, 50, 70, 0); n]);
            let limits: u32 = got.claims.iter().map(|c| c.limit_e4).sum();
            assert!((7000 - limits) < n as u32, "{n}: {:?}", got.claims);
            assert!(got.claims.iter().all(Claim::limited));
        }
        // A member's own lower limit stays.
        let got = split(&[claim(0, 10, 0), claim(0, 0, 0)], &[team(1, 50, 70, 0), team(1, 50, 70, 0)]);
        assert_eq!(got.claims[0].limit_e4, 1000);
        // The team's priority is its members' in the scheduler, and its spare goes first.
        let got = split(&[claim(0, 0, 5), claim(0, 0, 0), claim(20, 0, 0)], &[team(1, 20, 0, 1), team(1, 20, 0, 1), None]);
        assert!(got.claims[..2].iter().all(|c| c.priority == 1), "{:?}", got.claims);
        assert_eq!(percents(&got), vec![40.0, 40.0, 20.0]);
    }

    #[test]
    fn a_teams_share_counts_as_configured_against_self_declared_ones() {
        let declared = Some(Declared { uid: 1000, ceiling_e4: 10_000 });
        let got = super::split(&[(claim(0, 0, 0), None), (claim(100, 0, 0), declared)], &[team(1, 90, 0, 0), None]);
        assert_eq!(percents(&got), vec![90.0, 10.0]);
    }

    #[test]
    fn teams_without_shares_and_lone_tenants_share_equally() {
        let got = split(&[claim(0, 0, 0), claim(0, 0, 0), claim(0, 0, 0)], &[team(1, 0, 0, 0), team(1, 0, 0, 0), None]);
        assert_eq!(percents(&got), vec![25.0, 25.0, 50.0]);
        assert!(split(&[], &[]).targets.is_empty());
    }
}
